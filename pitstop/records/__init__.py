"""What a run leaves for people, built by pure functions (rendered and stored by `activities.records`)."""
