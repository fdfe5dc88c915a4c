"""The programs ``torchrun`` starts (``torchrun --nproc_per_node=2 -m helpers ddp-train``) and how a cell
starts them (:mod:`helpers.distributed.launch`).
"""
