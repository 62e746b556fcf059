"""Classic uncertainty methods behind one ``predict`` interface."""

from bnn_pyro.methods.base import BaseBayesianMethod, summarize_samples, to_probabilities

__all__ = ["BaseBayesianMethod", "summarize_samples", "to_probabilities"]
