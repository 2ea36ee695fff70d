"""The built-in tasks (plug-ins of `rlsvc.task.Task`): BlackJack and the code environment, and
the registry that loads a task by name. The code environment's problem sets and its scorer are
in `rlsvc.problems`."""
