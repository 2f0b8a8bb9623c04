"""The GPU plan as a process lives with it, shared by the kernel's magics and ``jupyter-gpu run``.

Everything between a face and the pure plan: :mod:`.plan_session` (change the plan all-or-nothing:
the snapshot, the planner, the admin fence and ceiling, the claims board), :mod:`.wait` (the
``--wait`` loop and its progress line), :mod:`.report` (the printed text of a plan), :mod:`.defaults`
(the admin's defaults from the environment) and :mod:`.child` (the environment a command started
with the plan gets, and whether it is a Python interpreter). No IPython, no tornado: a face (the
kernel, the CLI) adapts these with its own error type and way of showing progress.

Nothing is imported here, so ``jupyter-gpu run`` pays only for what it uses.
"""
