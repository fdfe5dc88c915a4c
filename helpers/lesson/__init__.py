"""What the lessons teach with: the device picker, the model, the data, training, checkpoints, memory,
timing and speed. Notebooks import these by name (``from helpers.lesson.devices import pick_device``).
"""
