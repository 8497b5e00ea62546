"""ctxadmin's ground: tenancy, the API base, providers and the shared building blocks every
domain app stands on."""
