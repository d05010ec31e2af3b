from servesize.cli import entry

entry()
