from strom.examples.stocks.cli import main

raise SystemExit(main())
