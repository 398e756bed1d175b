"""The HTTP side of the stored-run operations: requests in, the domain and the store called, answers out."""
