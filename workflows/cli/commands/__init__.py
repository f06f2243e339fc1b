"""One module per `spyre-ci` subcommand group.

Every module here defines ``register(subparsers) -> None``, which adds its parsers and sets
``func`` (``Callable[[argparse.Namespace], int]``) as a default. Modules are discovered, so a
new command never edits a shared list. Importing a module must stay cheap: import torch (or
anything heavy) inside the command function, never at module level.
"""
