<?php

declare(strict_types=1);

/**
 * SPDX-FileCopyrightText: 2026 Istota contributors
 * SPDX-License-Identifier: AGPL-3.0-or-later
 */

namespace OCA\Istota\Service;

use OCP\IUser;
use OCP\IUserManager;
use OCP\Security\ISecureRandom;

/**
 * BotAccount creates or adopts the Nextcloud user the bot works as: its storage holds
 * every user's workspace and the sidecar logs in with it over WebDAV and CalDAV.
 *
 * A password is set only on an account this creates, or when the admin asks for a reset:
 * an adopted account may be in use elsewhere, and silently changing its password would
 * lock that use out. Istota keeps the password it set as a sensitive app config value.
 */
class BotAccount {
	public const PASSWORD_LENGTH = 48;
	/** Symbols that survive shells, URLs and TOML untouched; password policies often want one. */
	private const PASSWORD_SYMBOLS = '-_.!@#%+=';
	/** Nextcloud's own rule for user ids (IUserManager::validateUserId). */
	private const UID_PATTERN = '/^[a-zA-Z0-9 _.@\-\']{1,64}$/';

	public function __construct(
		private readonly IUserManager $userManager,
		private readonly AppSettings $settings,
		private readonly ISecureRandom $random,
	) {
	}

	/** @throws \InvalidArgumentException when $uid cannot be a Nextcloud user id */
	public static function assertValidUid(string $uid): void {
		if ($uid !== trim($uid) || $uid === '.' || $uid === '..' || preg_match(self::UID_PATTERN, $uid) !== 1) {
			throw new \InvalidArgumentException(sprintf('--bot-user must be a Nextcloud user id (letters, digits, spaces and _.@-\', at most 64), got "%s"', $uid));
		}
	}

	/**
	 * Makes sure the account exists, carries the bot's display name and, when it is new or
	 * $resetPassword is set, a fresh password that Istota stores.
	 *
	 * @throws \RuntimeException when the account cannot be created or its password cannot be set
	 */
	public function ensure(string $uid, string $displayName, bool $resetPassword): BotAccountResult {
		self::assertValidUid($uid);
		$user = $this->userManager->get($uid);
		if (!$user instanceof IUser) {
			return $this->create($uid, $displayName);
		}

		$notes = [];
		$warnings = [];
		$changed = false;
		if ($resetPassword) {
			$password = $this->resetPassword($user);
			$changed = true;
			$notes[] = sprintf('Gave the existing Nextcloud user "%s" a new password; anything that logged in as "%s" with the old one must use the new one.', $uid, $uid);
		} else {
			$password = $this->knownPassword($uid);
			if ($password !== null) {
				$notes[] = sprintf('Using the existing Nextcloud user "%s" for the bot; its password is unchanged.', $uid);
			} else {
				$warnings[] = sprintf('The Nextcloud user "%s" already exists and Istota does not know its password, so the configuration has no bot_password. Run `occ istota:setup --reset-bot-password` to give it a new one (anything else logging in as "%s" must then use the new one), or put its password into bot_password yourself.', $uid, $uid);
			}
		}
		$warning = $this->applyDisplayName($user, $displayName);
		if ($warning !== null) {
			$warnings[] = $warning;
		}
		if (!$user->isEnabled()) {
			$warnings[] = sprintf('The Nextcloud user "%s" is disabled, so the sidecar cannot log in: enable it with `occ user:enable %s`.', $uid, $uid);
		}
		return new BotAccountResult($uid, $password, false, $changed, $notes, $warnings);
	}

	private function create(string $uid, string $displayName): BotAccountResult {
		$password = $this->newPassword();
		// Stored before the account exists: when Nextcloud creates the account and then
		// fails (a hook or listener throws after the user backend said yes), the next run
		// finds the account and a password that opens it, instead of an account nobody
		// knows the password of.
		$this->settings->setBotPassword($password);
		try {
			$user = $this->userManager->createUser($uid, $password);
		} catch (\Exception $e) {
			$made = $this->userManager->userExists($uid) ? ' The account was created before the error; run occ istota:setup again to finish.' : '';
			throw new \RuntimeException(sprintf('Nextcloud refused to create the user "%s": %s.%s', $uid, rtrim($e->getMessage(), '.'), $made), 0, $e);
		}
		if (!$user instanceof IUser) {
			throw new \RuntimeException(sprintf('Nextcloud could not create the user "%s" (no user backend accepted it)', $uid));
		}
		$warning = $this->applyDisplayName($user, $displayName);
		return new BotAccountResult($uid, $password, true, true, [sprintf('Created the Nextcloud user "%s" for the bot.', $uid)], $warning === null ? [] : [$warning]);
	}

	private function resetPassword(IUser $user): string {
		$uid = (string)$user->getUID();
		if (!$user->canChangePassword()) {
			throw new \RuntimeException(sprintf('the user backend of "%s" cannot change passwords: set one where that account lives and put it into bot_password', $uid));
		}
		$password = $this->newPassword();
		try {
			$ok = $user->setPassword($password);
		} catch (\Exception $e) {
			throw new \RuntimeException(sprintf('Nextcloud refused the new password for "%s": %s', $uid, $e->getMessage()), 0, $e);
		}
		if ($ok === false) {
			throw new \RuntimeException(sprintf('Nextcloud refused the new password for "%s"', $uid));
		}
		$this->settings->setBotPassword($password);
		return $password;
	}

	/**
	 * The stored password if it still opens this account; a stale one (another bot user
	 * before, or changed by hand) is forgotten so it is never written out.
	 */
	private function knownPassword(string $uid): ?string {
		$stored = $this->settings->botPassword();
		if ($stored === '') {
			return null;
		}
		$user = $this->userManager->checkPassword($uid, $stored);
		if ($user instanceof IUser && (string)$user->getUID() === $uid) {
			return $stored;
		}
		$this->settings->forgetBotPassword();
		return null;
	}

	/** Sets the display name to the bot's name; returns a warning when that was not possible. */
	private function applyDisplayName(IUser $user, string $displayName): ?string {
		if ((string)$user->getDisplayName() === $displayName) {
			return null;
		}
		$uid = (string)$user->getUID();
		if (!$user->canChangeDisplayName()) {
			return sprintf('Could not set the display name of "%s" to "%s": its user backend does not allow it.', $uid, $displayName);
		}
		try {
			if ($user->setDisplayName($displayName) === false) {
				return sprintf('Could not set the display name of "%s" to "%s".', $uid, $displayName);
			}
		} catch (\Exception $e) {
			return sprintf('Could not set the display name of "%s" to "%s": %s', $uid, $displayName, $e->getMessage());
		}
		return null;
	}

	/** A password with upper and lower case, digits and a symbol, as password policies ask. */
	private function newPassword(): string {
		$alphabet = ISecureRandom::CHAR_UPPER . ISecureRandom::CHAR_LOWER . ISecureRandom::CHAR_DIGITS . self::PASSWORD_SYMBOLS;
		// A 48-character draw lacks a class about once in 600 tries; 100 draws never all do.
		for ($i = 0; $i < 100; $i++) {
			$password = $this->random->generate(self::PASSWORD_LENGTH, $alphabet);
			if (self::hasEveryClass($password)) {
				return $password;
			}
		}
		throw new \RuntimeException('the random generator keeps returning weak passwords');
	}

	private static function hasEveryClass(string $password): bool {
		return preg_match('/[A-Z]/', $password) === 1
			&& preg_match('/[a-z]/', $password) === 1
			&& preg_match('/[0-9]/', $password) === 1
			&& strpbrk($password, self::PASSWORD_SYMBOLS) !== false;
	}
}
