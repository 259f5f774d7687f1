"""The front end: the command line, the pytest plugin and fixture, option parsing, and the runner
that runs one check (isolated or here, with a timeout, writing reports) for all of them."""
