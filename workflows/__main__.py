from workflows.cli.main import entry

entry()
