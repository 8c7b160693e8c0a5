from storekit.cli.app import main

main()
