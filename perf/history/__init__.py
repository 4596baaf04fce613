"""The results database: every run of the suite recorded (SQLite by default, PostgreSQL by URL), and
what reads it back: trends per GPU model, steps in them, the gate against recent history."""
