"""Watch caches (list + watch with bookmarks, relist on 410 Gone) and their REST adapter."""
