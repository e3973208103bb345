from indexer.cli import main

main()
