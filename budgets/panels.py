def home_panel(user):
    return None
