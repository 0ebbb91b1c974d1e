<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

/**
 * BotAccountResult is what `occ istota:setup` did with the bot's Nextcloud account: its
 * user id, its password when Istota knows it (null otherwise: then the sidecar
 * configuration carries no bot_password) and notes for the admin.
 */
final class BotAccountResult {
	/**
	 * @param list<string> $notes what was done, one sentence each; never a password
	 * @param list<string> $warnings what the admin still has to do; never a password
	 */
	public function __construct(
		public readonly string $uid,
		#[\SensitiveParameter]
		public readonly ?string $password,
		public readonly bool $created,
		public readonly bool $passwordChanged,
		public readonly array $notes,
		public readonly array $warnings = [],
	) {
	}

	public function passwordKnown(): bool {
		return $this->password !== null;
	}
}
