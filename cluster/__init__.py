"""Everything that imports Ray: actors, the shard scheduler, cluster configs."""
