from workflows.cli.warm_cli import entry

entry()
