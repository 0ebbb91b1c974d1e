<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Tests\Support;

use OCP\IUser;

/**
 * A Nextcloud user of the test Directory. Its password is kept in clear so tests can check
 * what setup did; the flags play user backends that cannot change passwords or names.
 */
final class TestUser implements IUser {
	public bool $enabled = true;
	public bool $passwordChangeable = true;
	public bool $displayNameChangeable = true;
	/** How often setPassword() was called, to prove an adopted account was left alone. */
	public int $passwordChanges = 0;

	public function __construct(
		private readonly string $uid,
		public string $displayName,
		private readonly ?string $email = null,
		public ?string $password = null,
	) {
	}

	public function getUID() {
		return $this->uid;
	}

	public function getDisplayName() {
		return $this->displayName;
	}

	public function setDisplayName($displayName) {
		if (!$this->displayNameChangeable) {
			return false;
		}
		$this->displayName = (string)$displayName;
		return true;
	}

	public function setPassword($password, $recoveryPassword = null) {
		if (!$this->passwordChangeable) {
			return false;
		}
		$this->password = (string)$password;
		$this->passwordChanges++;
		return true;
	}

	public function canChangePassword() {
		return $this->passwordChangeable;
	}

	public function canChangeDisplayName() {
		return $this->displayNameChangeable;
	}

	public function isEnabled() {
		return $this->enabled;
	}

	public function getEMailAddress() {
		return $this->email;
	}
}
