<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCA\Istota\Exception\SidecarException;

/**
 * PersonalSettingsService is the personal page's "Settings" area: persona, timezone, the
 * e-mail addresses that may write to the bot and the calendars it may use. The sidecar
 * validates every value and answers 422 with field-level problems.
 */
class PersonalSettingsService {
	/** The keys a user may change (docs/user-api.md, "Personal settings"). */
	public const FIELDS = ['persona', 'timezone', 'emails', 'calendars'];

	public function __construct(
		private readonly SidecarClient $client,
		private readonly SessionService $sessions,
	) {
	}

	/**
	 * @return array<string, mixed>
	 * @throws SidecarException
	 */
	public function get(string $uid): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		return $this->client->getJson(SidecarClient::userPath($uid, 'settings'));
	}

	/**
	 * Sends the given fields (null means "not given") and returns the settings as stored.
	 *
	 * @param array<string, mixed> $changes field => new value
	 * @return array<string, mixed>
	 * @throws SidecarException
	 */
	public function update(string $uid, array $changes): array {
		// The sidecar answers only for users it has heard of (a session, cached).
		$this->sessions->ensure($uid);
		$body = [];
		foreach (self::FIELDS as $field) {
			if (array_key_exists($field, $changes) && $changes[$field] !== null) {
				$body[$field] = $changes[$field];
			}
		}
		return $this->client->putJson(SidecarClient::userPath($uid, 'settings'), $body);
	}
}
