from workflows.cli.program import entry

entry()
