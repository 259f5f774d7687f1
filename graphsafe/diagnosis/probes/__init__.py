"""The diagnosis probes, one module per finding kind (the registry is :mod:`graphsafe.diagnosis`)."""
