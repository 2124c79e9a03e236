"""The chronicle: sections a summariser writes over closed ranges of the log."""
