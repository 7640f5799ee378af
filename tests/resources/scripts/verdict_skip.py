"""VERDICT line wins over the exit status."""
print("probing the engine")
print("VERDICT skip: engine not available on this arch")
