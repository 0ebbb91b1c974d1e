<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * SidecarConfig is what the sidecar must know from Nextcloud, rendered as the TOML of
 * docs/app-sidecar-protocol.md ("Sidecar configuration written by occ istota:setup").
 * It contains the secrets and the bot account's password: print or write it only on the
 * admin's request. bot_user is left out when empty, bot_password when it is unknown.
 */
final class SidecarConfig {
	public function __construct(
		public readonly string $nextcloudUrl,
		#[\SensitiveParameter]
		public readonly string $sharedSecret,
		public readonly string $botName,
		#[\SensitiveParameter]
		public readonly string $botSecret,
		public readonly string $listen,
		public readonly string $botUser = '',
		#[\SensitiveParameter]
		public readonly ?string $botPassword = null,
	) {
	}

	public function toToml(): string {
		$account = [];
		if ($this->botUser !== '') {
			$account[] = 'bot_user = ' . self::quote($this->botUser);
			if ($this->botPassword !== null) {
				$account[] = 'bot_password = ' . self::quote($this->botPassword);
			}
		}
		return implode("\n", [
			'# Istota sidecar configuration, written by "occ istota:setup".',
			'# It contains secrets: keep it readable by the sidecar\'s user only (mode 0600).',
			'',
			'[nextcloud]',
			'url = ' . self::quote($this->nextcloudUrl),
			'shared_secret = ' . self::quote($this->sharedSecret),
			...$account,
			'',
			'[talk]',
			'bot_name = ' . self::quote($this->botName),
			'bot_secret = ' . self::quote($this->botSecret),
			'',
			'[server]',
			'listen = ' . self::quote($this->listen),
			'',
		]);
	}

	/** A TOML basic string: quotes, backslashes and control characters escaped. */
	public static function quote(string $value): string {
		$escaped = '';
		$length = strlen($value);
		for ($i = 0; $i < $length; $i++) {
			$c = $value[$i];
			$o = ord($c);
			$escaped .= match (true) {
				$c === '"' => '\\"',
				$c === '\\' => '\\\\',
				$c === "\n" => '\\n',
				$c === "\t" => '\\t',
				$c === "\r" => '\\r',
				$o < 0x20 || $o === 0x7f => sprintf('\\u%04X', $o),
				default => $c,
			};
		}
		return '"' . $escaped . '"';
	}
}
