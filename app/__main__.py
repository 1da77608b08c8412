from tls_injector.cli import main

raise SystemExit(main())
