from strom.examples.pageviews.generate import main

raise SystemExit(main())
