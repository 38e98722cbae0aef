from tinyaot.cli.main import main

main()
