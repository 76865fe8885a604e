"""The load generator: trace readers, prompt synthesis and the replay driver."""
