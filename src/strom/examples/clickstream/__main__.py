from strom.examples.clickstream.cli import main

raise SystemExit(main())
