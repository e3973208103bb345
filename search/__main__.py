from search.cli import main

main()
