from mobius.cli import run

run()
