module github.com/istota/istota

go 1.26

ignore ./nextcloud-app/node_modules

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/emersion/go-webdav v0.6.0
	github.com/mattn/go-sqlite3 v1.14.53
	github.com/robfig/cron/v3 v3.0.1
)
