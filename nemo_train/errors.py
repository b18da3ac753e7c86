"""Errors the CLI reports as one line instead of a traceback."""


class UserInputError(ValueError):
    """Bad input from the user: a config value, a path, an image of the wrong shape.

    The message must name the offending value and say what was expected.
    """
