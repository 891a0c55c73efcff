import typer
HELP = "todo"
app = typer.Typer(no_args_is_help=True, rich_markup_mode=None)
