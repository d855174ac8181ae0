from strom.examples.shoes.cli import main

raise SystemExit(main())
