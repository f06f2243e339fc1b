from workflows.cli.main import main

raise SystemExit(main())
