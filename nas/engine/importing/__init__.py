"""Importing published supernets: one module per checkpoint format, each mapping the authors'
tensors onto a `nas` supernet (`nas import FORMAT FILE --name RUN`)."""
