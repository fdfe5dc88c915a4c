"""The lab's instruments and simulated machines: recorders of syncs and operators, peak memory, child
processes, the machines a test or a check cannot have (no driver, two GPUs, a GPU's device rules on
``meta``), graphs and plots. A lesson uses them to show what it teaches; they are never the lesson.
"""
