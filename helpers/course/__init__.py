"""The course's own machinery: the language it speaks (i18n), its settings (config), how long a run takes
(run_plan), the figures recorded on a GPU (gpu_figures) and the grading of a class's notebooks (grade, the
command line; grade_lessons, what a submission holds; grade_run, running it and its checks; grade_csv, the
gradebooks; grade_feedback, the learners' pages).
"""
