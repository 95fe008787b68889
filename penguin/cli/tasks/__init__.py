"""Running a task from the terminal: the model and approval choices (``model``), goal mode
(``goal``), the live driver (``live``) and the one task shared by ``run``, ``resume -m`` and
``chat`` (``task``).
"""
