<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IConfig;
use OCP\IGroupManager;
use OCP\IUser;
use OCP\IUserManager;

/**
 * Directory is the users, groups and config values of a test instance, answering as
 * IUserManager, IGroupManager and IConfig would.
 */
final class Directory implements IUserManager, IGroupManager, IConfig {
	/** @var array<string, IUser> */
	public array $users = [];
	/** @var array<string, list<string>> group id => user ids */
	public array $groups = ['admin' => []];
	/** @var array<string, array<string, array<string, string>>> uid => app => key => value */
	public array $userValues = [];
	/** @var array<string, string> */
	public array $system = [];

	public function addUser(string $uid, string $displayName, ?string $email = null, array $groups = [], array $core = []): void {
		$this->users[$uid] = new TestUser($uid, $displayName, $email);
		foreach ($groups as $group) {
			$this->groups[$group][] = $uid;
		}
		foreach ($core as $key => $value) {
			$this->userValues[$uid]['core'][$key] = $value;
		}
	}

	public function get($uid) {
		return $this->users[$uid] ?? null;
	}

	public function isAdmin($userId) {
		return $this->isInGroup($userId, 'admin');
	}

	public function isInGroup($userId, $group) {
		return in_array($userId, $this->groups[$group] ?? [], true);
	}

	public function getSystemValueString(string $key, string $default = ''): string {
		return $this->system[$key] ?? $default;
	}

	public function getUserValue($userId, $appName, $key, $default = '') {
		return $this->userValues[$userId][$appName][$key] ?? $default;
	}
}
