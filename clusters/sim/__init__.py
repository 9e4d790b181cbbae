"""The simulated cluster on a virtual clock, with the discrete-event loop that drives the controller."""
