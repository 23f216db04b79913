"""scripts/compose-local: docker-compose.yml's topology as local processes (docs/docker.md)."""
