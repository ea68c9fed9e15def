"""The floor's web view: a live pit map, the rulings queue and each table's page (app.py),
built from the tables' messages (view.py), for users who log in with a role (users.py)."""
