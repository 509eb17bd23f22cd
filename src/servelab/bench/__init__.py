"""servelab.bench"""
