<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCP\IConfig;

/**
 * SetupService prepares everything the sidecar needs: the shared secret (created once),
 * the bot's Nextcloud account, the bot secret and Talk registration, the sidecar URL, and
 * the TOML config carrying them. Re-running keeps every existing secret and password.
 */
class SetupService {
	public function __construct(
		private readonly AppSettings $settings,
		private readonly BotRegistration $registration,
		private readonly BotAccount $account,
		private readonly IConfig $config,
	) {
	}

	/** Nextcloud's own URL as the sidecar should use it: the system config overwrite.cli.url. */
	public function defaultNextcloudUrl(): string {
		return rtrim(trim($this->config->getSystemValueString('overwrite.cli.url', '')), '/');
	}

	/**
	 * Validates the input, stores the sidecar URL and bot user when given, creates missing
	 * secrets, creates or adopts the bot account, registers the bot with Talk and returns
	 * the sidecar configuration.
	 *
	 * @param ?string $nextcloudUrl null or '' for overwrite.cli.url
	 * @param ?string $sidecarUrl null or '' to keep the configured one
	 * @param ?string $botUser null or '' to keep the configured one (default "istota")
	 * @param bool $resetBotPassword give an existing bot account a new password
	 * @throws \InvalidArgumentException when a URL or the bot user is unusable; nothing is changed then
	 * @throws \RuntimeException when the bot account cannot be created or its password set
	 */
	public function prepare(?string $nextcloudUrl, ?string $sidecarUrl, ?string $botUser = null, bool $resetBotPassword = false): SetupOutcome {
		$nextcloudUrl = rtrim(trim((string)$nextcloudUrl), '/');
		if ($nextcloudUrl === '') {
			$nextcloudUrl = $this->defaultNextcloudUrl();
		}
		if ($nextcloudUrl === '') {
			throw new \InvalidArgumentException('Nextcloud\'s URL is unknown: set overwrite.cli.url in config.php or pass --nextcloud-url.');
		}
		self::assertHttpUrl($nextcloudUrl, '--nextcloud-url');

		$sidecarUrl = rtrim(trim((string)$sidecarUrl), '/');
		if ($sidecarUrl !== '') {
			self::assertHttpUrl($sidecarUrl, '--sidecar-url');
		} else {
			$sidecarUrl = $this->settings->sidecarUrl();
			self::assertHttpUrl($sidecarUrl, 'the sidecar_url app config');
		}
		$listen = self::listenAddress($sidecarUrl);

		$botUser = trim((string)$botUser);
		if ($botUser === '') {
			$botUser = $this->settings->botUser();
		}
		BotAccount::assertValidUid($botUser);

		if ($sidecarUrl !== $this->settings->sidecarUrl()) {
			$this->settings->setSidecarUrl($sidecarUrl);
		}
		if ($botUser !== $this->settings->botUser()) {
			$this->settings->setBotUser($botUser);
		}
		$sharedSecret = $this->settings->ensureSharedSecret();
		$botName = $this->settings->botName();
		$account = $this->account->ensure($botUser, $botName, $resetBotPassword);
		$registration = $this->registration->register();

		return new SetupOutcome(
			new SidecarConfig($nextcloudUrl, $sharedSecret, $botName, $this->settings->botSecret(), $listen, $account->uid, $account->password),
			$registration,
			$account,
		);
	}

	/**
	 * The sidecar's listen address for its URL: host and port, the port defaulting to the
	 * scheme's; IPv6 hosts keep their brackets.
	 */
	public static function listenAddress(string $sidecarUrl): string {
		$parts = parse_url($sidecarUrl);
		if (!is_array($parts) || !isset($parts['host'])) {
			throw new \InvalidArgumentException('not a URL: ' . $sidecarUrl);
		}
		$host = $parts['host'];
		if (str_contains($host, ':') && !str_starts_with($host, '[')) {
			$host = '[' . $host . ']';
		}
		$port = $parts['port'] ?? (strtolower($parts['scheme'] ?? 'http') === 'https' ? 443 : 80);
		return $host . ':' . $port;
	}

	/**
	 * Writes $contents to $path with mode 0600, atomically: a temporary file in the same
	 * directory is renamed over the target, so readers never see a partial file.
	 *
	 * @throws \RuntimeException
	 */
	public function writeFile(string $path, #[\SensitiveParameter] string $contents): void {
		$dir = dirname($path);
		if (!is_dir($dir)) {
			throw new \RuntimeException(sprintf('directory %s does not exist', $dir));
		}
		if (is_dir($path)) {
			throw new \RuntimeException(sprintf('%s is a directory', $path));
		}
		$tmp = @tempnam($dir, '.istota-');
		// tempnam() falls back to the system temp dir when $dir is not writable.
		if ($tmp === false || realpath(dirname($tmp)) !== realpath($dir)) {
			if (is_string($tmp)) {
				@unlink($tmp);
			}
			throw new \RuntimeException(sprintf('cannot create a file in %s', $dir));
		}
		if (!@chmod($tmp, 0600) || @file_put_contents($tmp, $contents) !== strlen($contents) || !@rename($tmp, $path)) {
			@unlink($tmp);
			throw new \RuntimeException(sprintf('cannot write %s', $path));
		}
	}

	private static function assertHttpUrl(string $url, string $what): void {
		$parts = parse_url($url);
		$scheme = is_array($parts) ? strtolower((string)($parts['scheme'] ?? '')) : '';
		if (!in_array($scheme, ['http', 'https'], true) || (string)($parts['host'] ?? '') === ''
			|| isset($parts['query']) || isset($parts['fragment']) || isset($parts['user'])) {
			throw new \InvalidArgumentException(sprintf('%s must be an http(s) URL like https://cloud.example.com, got "%s"', $what, $url));
		}
	}
}
