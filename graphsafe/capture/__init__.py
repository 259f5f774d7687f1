"""Capture machinery: the capture session, the write ledger, the object walk that names buffers,
static state, graph-versus-eager comparison, and the contexts probes read."""
