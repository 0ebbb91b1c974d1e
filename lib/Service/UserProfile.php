<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCP\IConfig;
use OCP\IGroupManager;
use OCP\IUser;

/**
 * UserProfile is what only Nextcloud knows about a user and the sidecar needs to decide
 * and to answer: names, e-mail, timezone, language, group ids and the admin flag. It is
 * sent with every Talk event (sender) and with the settings pages' session call. Who may
 * use the bot is decided by the sidecar from the groups (docs/user-api.md, "Access").
 */
class UserProfile {
	public function __construct(
		private readonly IGroupManager $groupManager,
		private readonly IConfig $config,
	) {
	}

	/**
	 * @return array{display_name: string, email: string, timezone: string, language: string, groups: list<string>, is_admin: bool}
	 */
	public function of(IUser $user): array {
		$uid = (string)$user->getUID();
		return [
			'display_name' => (string)$user->getDisplayName(),
			'email' => (string)($user->getEMailAddress() ?? ''),
			'timezone' => $this->userValue($uid, 'timezone', $this->config->getSystemValueString('default_timezone', 'UTC'), 'UTC'),
			'language' => $this->userValue($uid, 'lang', $this->config->getSystemValueString('default_language', 'en'), 'en'),
			'groups' => $this->groups($user),
			'is_admin' => (bool)$this->groupManager->isAdmin($uid),
		];
	}

	/**
	 * The user's group ids, sorted, as a JSON list even when a backend answers with keys.
	 *
	 * @return list<string>
	 */
	private function groups(IUser $user): array {
		$groups = [];
		foreach ($this->groupManager->getUserGroupIds($user) as $group) {
			if (is_scalar($group) && (string)$group !== '') {
				$groups[] = (string)$group;
			}
		}
		$groups = array_values(array_unique($groups));
		sort($groups, SORT_STRING);
		return $groups;
	}

	private function userValue(string $uid, string $key, string $systemDefault, string $fallback): string {
		$value = (string)$this->config->getUserValue($uid, 'core', $key, '');
		if ($value !== '') {
			return $value;
		}
		return $systemDefault !== '' ? $systemDefault : $fallback;
	}
}
