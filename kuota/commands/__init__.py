"""One module per `kuota` subcommand; each exposes register(app)."""
