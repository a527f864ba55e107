"""Model processes: the course's models and functions that student code examines, kept out of its process.

An exercise whose student code examines models (students write checks, judged against correct and broken models)
must never hold a model's object, code or source: what it could read there (a module name, a class, a docstring, a
mutant's source) would tell a broken model from a correct one without examining its behaviour. So the models live in
a process of the grader's own, the model process (grader/models/server.py), and student code holds handles
(grader/models/handles.py) whose calls cross to it, tensors by value (grader/models/wire.py).

Where it is started, and why there (grader/models/host.py). The supervisor starts it, outside the box, before it asks
the worker to run the exercise, and it listens on a Unix socket in the supervisor's scratch folder, mode 0600. The
worker's child connects to it as root, through the descriptor of that folder it holds until it drops its privileges,
and keeps the connected socket; then it closes the folder, becomes the grading's uid and imports the student's file.
- The course's served module, its solutions, variants and mutants stay where they are, outside the box: nothing of
  them is staged into it, so no file of the box, however its permissions are set, holds a reference.
- The model process is not in the box's pid namespace (strict level: student code cannot even see it in /proc), and
  it runs as the supervisor's user, never the grading's uid, so the student's uid can neither ptrace it nor read its
  /proc/<pid>/mem, maps or environment (basic level, where it is visible).
- Forking it from the worker instead would put its code and data in a process whose descendants run student code,
  and would need the references inside the box; starting it per child would cost a torch import per probe group.
- One process for the exercise's whole run: its children (probe groups) connect one after another, each connection
  starting from nothing.
On the plain route (`grader check` on the student's own machine, any system, nothing to hide) the child that runs the
probes starts the model process itself, as a plain child talking over its pipes (`handles.attach`, `spawn`).
"""

FAULT = "FAULT"   # the first word of the model process's one line saying why it ended on a limit or a failure
