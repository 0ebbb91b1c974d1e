<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\AppInfo\Application;
use OCP\IAppConfig;
use OCP\Security\ISecureRandom;

/**
 * AppSettings is the one place that knows the app's config keys, their defaults and
 * which of them are secret. Secrets are lazy and sensitive (encrypted at rest, hidden
 * from listings) and are only ever read through the typed getters.
 *
 * Non-secret keys are read defensively: an admin may have set them with
 * `occ config:app:set` using another type, and a type conflict must never break the
 * Talk listener, so it falls back to the default.
 */
class AppSettings {
	public const KEY_SIDECAR_URL = 'sidecar_url';
	public const KEY_SHARED_SECRET = 'shared_secret';
	public const KEY_BOT_SECRET = 'bot_secret';
	public const KEY_BOT_NAME = 'bot_name';
	public const KEY_FORWARD_TIMEOUT_MS = 'forward_timeout_ms';
	public const KEY_BOT_USER = 'bot_user';
	public const KEY_BOT_PASSWORD = 'bot_password';
	public const KEY_MAX_ATTACHMENT_MB = 'max_attachment_mb';
	public const KEY_WS_PATH = 'ws_path';

	public const DEFAULT_SIDECAR_URL = 'http://127.0.0.1:8765';
	public const DEFAULT_BOT_NAME = 'Istota';
	public const DEFAULT_FORWARD_TIMEOUT_MS = 400;
	public const DEFAULT_BOT_USER = 'istota';
	public const DEFAULT_MAX_ATTACHMENT_MB = 50;
	/** Where the reverse proxy forwards the sidecar's WebSocket (deploy/nginx, deploy/apache). */
	public const DEFAULT_WS_PATH = '/istota-ws/';

	/** The Talk bot URL; Talk invokes our listener for it (talk-bots.md §7). */
	public const BOT_URL = 'nextcloudapp://istota';
	/** event (4) | response (2) | reaction (8): invoked in-process, may answer later, sees reactions. */
	public const BOT_FEATURES = 14;
	public const SECRET_LENGTH = 64;

	/** Bounds for forward_timeout_ms: the listener runs inside the sender's request. */
	private const MIN_FORWARD_TIMEOUT_MS = 50;
	private const MAX_FORWARD_TIMEOUT_MS = 5000;

	public function __construct(
		private readonly IAppConfig $appConfig,
		private readonly ISecureRandom $random,
	) {
	}

	public function sidecarUrl(): string {
		$url = trim($this->readString(self::KEY_SIDECAR_URL, ''));
		return $url === '' ? self::DEFAULT_SIDECAR_URL : rtrim($url, '/');
	}

	public function setSidecarUrl(string $url): void {
		$this->appConfig->setValueString(Application::APP_ID, self::KEY_SIDECAR_URL, rtrim($url, '/'));
	}

	public function botName(): string {
		$name = trim($this->readString(self::KEY_BOT_NAME, ''));
		return $name === '' ? self::DEFAULT_BOT_NAME : $name;
	}

	/** The app↔sidecar HMAC key, or '' when `occ istota:setup` has not run yet. */
	public function sharedSecret(): string {
		return $this->appConfig->getValueString(Application::APP_ID, self::KEY_SHARED_SECRET, '', lazy: true);
	}

	/** Returns the shared secret, creating it first if there is none. Never replaces one. */
	public function ensureSharedSecret(): string {
		return $this->ensureSecret(self::KEY_SHARED_SECRET, ISecureRandom::CHAR_ALPHANUMERIC);
	}

	/** The Talk bot secret, or '' when the install repair step has not run yet. */
	public function botSecret(): string {
		return $this->appConfig->getValueString(Application::APP_ID, self::KEY_BOT_SECRET, '', lazy: true);
	}

	/**
	 * Returns the Talk bot secret, creating it first if there is none. Talk refuses the same
	 * bot URL with another secret, so an existing secret is never replaced.
	 */
	public function ensureBotSecret(): string {
		return $this->ensureSecret(self::KEY_BOT_SECRET, ISecureRandom::CHAR_HUMAN_READABLE);
	}

	/** Total time the Talk listener may spend on the sidecar, in milliseconds. */
	public function forwardTimeoutMs(): int {
		try {
			$ms = $this->appConfig->getValueInt(Application::APP_ID, self::KEY_FORWARD_TIMEOUT_MS, self::DEFAULT_FORWARD_TIMEOUT_MS);
		} catch (\Throwable) {
			$ms = (int)$this->readString(self::KEY_FORWARD_TIMEOUT_MS, (string)self::DEFAULT_FORWARD_TIMEOUT_MS);
		}
		if ($ms <= 0) {
			$ms = self::DEFAULT_FORWARD_TIMEOUT_MS;
		}
		return max(self::MIN_FORWARD_TIMEOUT_MS, min(self::MAX_FORWARD_TIMEOUT_MS, $ms));
	}

	/**
	 * The Nextcloud user id of the bot account, whose storage holds every user's workspace
	 * (ARCHITECTURE.md §3) and through which the sidecar reaches WebDAV and CalDAV.
	 */
	public function botUser(): string {
		$uid = trim($this->readString(self::KEY_BOT_USER, ''));
		return $uid === '' ? self::DEFAULT_BOT_USER : $uid;
	}

	public function setBotUser(string $uid): void {
		$this->appConfig->setValueString(Application::APP_ID, self::KEY_BOT_USER, $uid);
	}

	/** The bot account's password as `occ istota:setup` last set it, or '' when unknown. */
	public function botPassword(): string {
		return $this->appConfig->getValueString(Application::APP_ID, self::KEY_BOT_PASSWORD, '', lazy: true);
	}

	public function setBotPassword(#[\SensitiveParameter] string $password): void {
		$this->appConfig->setValueString(Application::APP_ID, self::KEY_BOT_PASSWORD, $password, lazy: true, sensitive: true);
	}

	/** Drops a stored bot password that no longer opens the bot account. */
	public function forgetBotPassword(): void {
		$this->appConfig->deleteKey(Application::APP_ID, self::KEY_BOT_PASSWORD);
	}

	/**
	 * The largest file shared in Talk that the listener copies into the bot's storage, in
	 * bytes. The copy happens inside the sender's request, so bigger files are skipped.
	 */
	public function maxAttachmentBytes(): int {
		try {
			$mb = $this->appConfig->getValueInt(Application::APP_ID, self::KEY_MAX_ATTACHMENT_MB, self::DEFAULT_MAX_ATTACHMENT_MB);
		} catch (\Throwable) {
			$mb = (int)$this->readString(self::KEY_MAX_ATTACHMENT_MB, (string)self::DEFAULT_MAX_ATTACHMENT_MB);
		}
		if ($mb <= 0) {
			$mb = self::DEFAULT_MAX_ATTACHMENT_MB;
		}
		return $mb * 1024 * 1024;
	}

	/**
	 * Where browsers open the sidecar's WebSocket: a path on Nextcloud's host (the
	 * reverse-proxy location, not below Nextcloud's webroot) or a full ws(s):// URL when
	 * the proxy lives elsewhere. Anything else falls back to the default.
	 */
	public function wsPath(): string {
		$value = trim($this->readString(self::KEY_WS_PATH, ''));
		if ($value === '') {
			return self::DEFAULT_WS_PATH;
		}
		if (preg_match('~^wss?://[^/\s?#]+(/[^\s?#]*)?$~i', $value) === 1) {
			return $value;
		}
		if (preg_match('#^/[A-Za-z0-9._~!$&\'()*+,;=:@%/-]*$#', $value) === 1) {
			return $value;
		}
		return self::DEFAULT_WS_PATH;
	}

	/** Connect timeout of the listener's request: half the total, so a dead port fails fast. */
	public function connectTimeoutMs(): int {
		return max(self::MIN_FORWARD_TIMEOUT_MS / 2, intdiv($this->forwardTimeoutMs(), 2));
	}

	private function ensureSecret(string $key, string $alphabet): string {
		$secret = $this->appConfig->getValueString(Application::APP_ID, $key, '', lazy: true);
		if ($secret !== '') {
			return $secret;
		}
		$secret = $this->random->generate(self::SECRET_LENGTH, $alphabet);
		$this->appConfig->setValueString(Application::APP_ID, $key, $secret, lazy: true, sensitive: true);
		return $secret;
	}

	/**
	 * Reads a non-secret string key; a value stored with another type (or unreadable)
	 * yields the default.
	 */
	private function readString(string $key, string $default): string {
		try {
			return $this->appConfig->getValueString(Application::APP_ID, $key, $default);
		} catch (\Throwable) {
			return $default;
		}
	}
}
