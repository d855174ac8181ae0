from strom.examples.wordcount.cli import main

raise SystemExit(main())
