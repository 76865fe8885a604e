"""Load: arrival schedules, the crossover against load, capacity at an SLO, the best setting per load."""
