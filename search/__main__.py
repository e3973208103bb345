from search.cli.app import main

main()
