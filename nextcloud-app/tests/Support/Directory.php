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
	/** What createUser() does instead of creating: an exception to throw, or false to return. */
	public \Throwable|false|null $createFailure = null;
	/** Thrown after the account was made, as a failing hook or listener does in Nextcloud. */
	public ?\Throwable $failAfterCreate = null;

	public function addUser(string $uid, string $displayName, ?string $email = null, array $groups = [], array $core = [], ?string $password = null): TestUser {
		$user = new TestUser($uid, $displayName, $email, $password);
		$this->users[$uid] = $user;
		foreach ($groups as $group) {
			$this->groups[$group][] = $uid;
		}
		foreach ($core as $key => $value) {
			$this->userValues[$uid]['core'][$key] = $value;
		}
		return $user;
	}

	public function get($uid) {
		return $this->users[$uid] ?? null;
	}

	public function userExists($uid) {
		return isset($this->users[$uid]);
	}

	public function checkPassword($loginName, $password) {
		$user = $this->users[$loginName] ?? null;
		return $user instanceof TestUser && $user->password !== null && hash_equals($user->password, (string)$password) ? $user : false;
	}

	public function createUser($uid, $password) {
		if ($this->createFailure instanceof \Throwable) {
			throw $this->createFailure;
		}
		if ($this->createFailure === false || isset($this->users[$uid])) {
			return false;
		}
		// Nextcloud starts the display name as the user id.
		$user = $this->addUser((string)$uid, (string)$uid, null, [], [], (string)$password);
		if ($this->failAfterCreate !== null) {
			throw $this->failAfterCreate;
		}
		return $user;
	}

	public function isAdmin($userId) {
		return $this->isInGroup($userId, 'admin');
	}

	public function groupExists($gid) {
		return isset($this->groups[$gid]);
	}

	public function isInGroup($userId, $group) {
		return in_array($userId, $this->groups[$group] ?? [], true);
	}

	public function getUserGroupIds(IUser $user): array {
		$ids = [];
		foreach ($this->groups as $group => $members) {
			if (in_array($user->getUID(), $members, true)) {
				$ids[] = (string)$group;
			}
		}
		return $ids;
	}

	public function getSystemValueString(string $key, string $default = ''): string {
		return $this->system[$key] ?? $default;
	}

	public function getUserValue($userId, $appName, $key, $default = '') {
		return $this->userValues[$userId][$appName][$key] ?? $default;
	}

	public function setUserValue($userId, $appName, $key, $value, $preCondition = null) {
		$this->userValues[$userId][$appName][$key] = (string)$value;
	}

	public function callForAllUsers(\Closure $callback, $search = '') {
		foreach ($this->users as $user) {
			$callback($user);
		}
	}
}
