from raftcron.cli.main import main

raise SystemExit(main())
